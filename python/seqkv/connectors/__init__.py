"""Serving-engine connectors: seqkv.connectors.sglang, seqkv.connectors.vllm
(vLLM's KV connector) and seqkv.connectors.vllm_tier (a secondary tier of
vLLM's tiered KV offloading)."""
