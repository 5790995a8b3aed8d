"""The Streamlit dashboard: ``main.py`` is the script ``streamlit run`` runs, ``app_pages/`` its pages (thin
scripts), and the modules beside them the pages' sections, figures and queries (tests import them directly)."""

from pathlib import Path

SCRIPT = Path(__file__).with_name("main.py")
