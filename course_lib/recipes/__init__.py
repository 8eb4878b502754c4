"""Training recipes: the project's own pretraining and fine-tuning code, shared by the chapters
and by the ``course`` command line (``course train bert ...``). One module per model family."""
