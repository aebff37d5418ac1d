"""Serving-engine connectors: seqkv.connectors.sglang, seqkv.connectors.vllm."""
