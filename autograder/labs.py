"""The course's labs in order: assignment folder and notebook name (nbgrader assignment = folder)."""
LABS = {
    "00-start-here": "start_here.ipynb",
    "01-capacity-ledger": "capacity_ledger.ipynb",
    "02-atomic-prefill": "atomic_prefill.ipynb",
    "03-decode-growth": "decode_growth.ipynb",
    "04-logical-reconstruction": "logical_reconstruction.ipynb",
}
