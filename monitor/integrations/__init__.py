"""Talking to the servers themselves: llama-server's ``/slots``, llama-swap's config and API."""
