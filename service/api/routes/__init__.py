"""One router per resource of the HTTP API (`/api/v1`)."""
