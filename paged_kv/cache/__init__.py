"""The mechanisms labs 01-05 rebuild: the capacity ledger, the block manager (the tutorial's and nano-vllm's
with prefix caching), its free queue, the engine-loop steps and state audits. Imports no other layer."""
