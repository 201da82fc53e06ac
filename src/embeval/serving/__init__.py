"""Servers that expose any embeval subject under a standard protocol, on 127.0.0.1 by default:
an OpenAI-compatible chat endpoint (:mod:`.openai_server`) and the OpenVLA REST protocol
(:mod:`.openvla_server`). :mod:`.runner` starts a FastAPI app in a thread or in the foreground."""
