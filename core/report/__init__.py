"""The compile report: its schema (schema.py), the HTML page (html.py) and its charts (charts.py)."""
