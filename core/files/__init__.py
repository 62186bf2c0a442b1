"""Files on disk shared by the compiler, the service and the CLI: written whole or not at all."""
