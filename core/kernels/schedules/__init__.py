"""Default schedules per target kind (cpu today), and the generic pattern-based ones."""
