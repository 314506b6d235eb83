"""Who acts: scripted baselines, local Hugging Face models, OpenAI-compatible endpoints, vLLM."""
