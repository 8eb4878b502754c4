"""The course's text data: a generated corpus with gold trees, tokenizers, user text, real vocabularies."""
