"""The compile driver: import -> optimize -> tune -> build -> validate -> benchmark -> package (pipeline.py)."""
