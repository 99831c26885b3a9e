"""Extract: ask for each chunk's answer, validate it, merge a document's answers, ground its quotes."""
