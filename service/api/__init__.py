"""The HTTP API: the FastAPI app (app.py), routes and schemas per resource, auth, uploads, rate limits."""
