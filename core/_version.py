"""The compiler's version, in its own module so that anything may import it without importing the compiler."""
__version__ = "0.1.0"
