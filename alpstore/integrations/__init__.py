"""Drop-ins for agent frameworks, each behind an optional extra.

May import ``alpstore.store`` and every layer below it, never the CLI, the UI or ``testing``.

- ``alpstore.integrations.langgraph``: ``AlpstoreSaver``, a LangGraph checkpointer
  (``pip install 'alpstore[langgraph]'``).
- ``alpstore.integrations.openai_agents``: ``AlpstoreSession``, an OpenAI Agents SDK session
  (``pip install 'alpstore[openai-agents]'``).
- ``alpstore.integrations.lgthreads``: alpstore's backtrack and fork of a LangGraph thread,
  done so LangGraph sees them (``session backtrack|fork`` call it; issue 40).

The saver's parts, top down: ``langgraph`` (the ``BaseCheckpointSaver`` protocol, sync and
async); ``_lgwrite``, ``_lgread``, ``_lgpolicy`` (its write and read paths, manifest policy
events); ``_lgthread`` (what the process keeps: ``SaverState``, the saver's base class, and each
thread's ``ThreadState``); ``_lgmaint``, ``_lgdb`` (SQL: deletion and copies; rows and head
loading); ``_lgspaces`` (a subgraph namespace's session under its thread); ``_extras`` (the
ImportError naming the pip install line); ``_lgpack``, ``_lgcodec``, ``_lgbuild`` (packed rows
and ids; values and message documents; messages made from documents).
"""
