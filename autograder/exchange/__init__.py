"""The hub verb (``make hub-release``, ``make hub-grade``): release into nbgrader's exchange and collect from it
without trusting it (exchange, inbound), owners read from the exchange's own files (hub_uids)."""
