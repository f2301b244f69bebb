"""jupyterhub-idle-culler's configuration for the course hub (``--config``, given by ``hub.settings.culler_command``).

The culler logs "Could not load pycurl ... recommended if you have a large number of users" at every start
when pycurl (a C extension, not in the lock) is missing. A course hub has at most 200 users, for whom
tornado's own HTTP client does, so that one line is dropped; every other line of the culler is kept.
"""

import logging


class _NoPycurlAdvice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Could not load pycurl")


logging.getLogger("IdleCuller").addFilter(_NoPycurlAdvice())  # the culler's traitlets Application logger
