"""Scripted experts of the twin (one per task; built by ``SimBackend.make_expert()``)."""
