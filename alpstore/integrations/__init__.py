"""Drop-ins for agent frameworks, each behind an optional extra.

May import ``alpstore.store`` and every layer below it, never the CLI, the UI or ``testing``.

- ``alpstore.integrations.langgraph``: ``AlpstoreSaver``, a LangGraph checkpointer
  (``pip install 'alpstore[langgraph]'``).
- ``alpstore.integrations.openai_agents``: ``AlpstoreSession``, an OpenAI Agents SDK session
  (``pip install 'alpstore[openai-agents]'``).

The saver's parts: ``langgraph`` (the ``BaseCheckpointSaver`` protocol, sync and async),
``_lgwrite`` / ``_lgread`` (its write and read paths), ``_lgthread`` (a thread's state in this
process), ``_lgpolicy`` (manifest policy events), ``_lgdb`` / ``_lgmaint`` (SQL: rows, head
loading; deletion and copies), ``_lgcodec`` / ``_lgbuild`` / ``_lgpack`` (values and message
documents; messages made from documents; packed rows and ids).
"""
