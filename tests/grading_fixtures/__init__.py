"""The grader's tests' shared helpers: chapters.py (a chapter's notebooks, reference answers,
submissions, release check and ``course grade`` batch, for any chapter) and cases.py (chapter
02's honest, partial and adversarial submissions)."""
