"""The report's schema: `report.json`'s stable keys (DESIGN.md), built from what a compile measured."""
SCHEMA_VERSION = 1
