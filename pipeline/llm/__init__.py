"""Talking to the model: prompts, token estimates, the OpenAI-compatible client, the global rate limit."""
