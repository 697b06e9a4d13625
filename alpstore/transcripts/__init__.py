"""Agent transcripts as trees: Claude Code sessions and Codex CLI rollouts, imported and
recorded incrementally. A feature: may import core, sessions, archive, views, db and below.

- :mod:`~alpstore.transcripts.lines`: the new bytes of a file as records (torn last line
  waits, bad lines refused or skipped by number).
- :mod:`~alpstore.transcripts.claude` and :mod:`~alpstore.transcripts.codex`: readers, one
  per format, turning records into typed steps (:mod:`~alpstore.transcripts.steps`).
- :mod:`~alpstore.transcripts.replay`: the one format-neutral step that writes a tree as
  sessions: the main line, backtracks for rewinds, folds for compactions, child sessions for
  subagents.
- :mod:`~alpstore.transcripts.state`: how far each source was read (incremental imports).
- :mod:`~alpstore.transcripts.importing`: one import of one transcript, in one transaction.
"""
