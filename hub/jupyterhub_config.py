"""JupyterHub's configuration for the course hub (``jupyterhub -f hub/jupyterhub_config.py``).

``python -m hub up`` (``make hub``: ``hub.__main__.prepare``) writes the hub's settings
(``hub.settings.HubSettings``) to ``state/hub.json`` and points ``PAGED_KV_HUB_SETTINGS`` at it;
``hub.settings.configure`` turns them into JupyterHub's options.
"""

import os
import re
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hub.settings import HubSettings, configure  # noqa: E402

# JupyterHub 5.5.0's own event schema (jupyterhub/event-schemas/server-actions/v1.yaml) has an integer
# `version`, which jupyter-events >= 0.11 coerces with a JupyterEventsVersionWarning at every start. It is not
# ours to fix, and upstream kept the integer on purpose while it supported Python 3.8 (jupyterhub/jupyterhub
# PR 4998): silence exactly that warning for exactly that schema, nothing else.
SERVER_ACTION_SCHEMA = "https://schema.jupyter.org/jupyterhub/events/server-action"
try:
    from jupyter_events.utils import JupyterEventsVersionWarning
except ImportError:  # an older jupyter-events: it does not warn
    pass
else:
    warnings.filterwarnings(
        "ignore",
        category=JupyterEventsVersionWarning,
        message=r"(?s).*Please update schema: " + re.escape(SERVER_ACTION_SCHEMA) + "$",
    )

c = get_config()  # noqa: F821  (provided by JupyterHub when it loads this file)
configure(c, HubSettings.load(Path(os.environ["PAGED_KV_HUB_SETTINGS"])))
