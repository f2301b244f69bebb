"""JupyterHub's configuration for the course hub (``jupyterhub -f hub/jupyterhub_config.py``).

``hub.serve`` writes the hub's settings (``hub.settings.HubSettings``) to ``state/hub.json`` and points
``PAGED_KV_HUB_SETTINGS`` at it; ``hub.settings.configure`` turns them into JupyterHub's options.
"""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hub.settings import HubSettings, configure  # noqa: E402

c = get_config()  # noqa: F821  (provided by JupyterHub when it loads this file)
configure(c, HubSettings.load(Path(os.environ["PAGED_KV_HUB_SETTINGS"])))
