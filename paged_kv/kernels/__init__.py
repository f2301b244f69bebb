"""Lab 06: paged decode attention, as a torch reference and as Triton kernels (GPU or interpreter, and offline
GPU builds). May import ``paged_kv.cache``, nothing else of the package."""
