"""Lab 07: a small serving engine over the cache and the kernels: a tiny model, KV contexts and cache ops,
runner, scheduler, sampling, tokenizer and ``LLMEngine``. May import ``paged_kv.cache`` and ``paged_kv.kernels``."""
