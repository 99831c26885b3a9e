"""Submit: find and check the input files, store their text once, split it into chunks by section."""
