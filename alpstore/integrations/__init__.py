"""Drop-ins for agent frameworks, each behind an optional extra.

- ``alpstore.integrations.langgraph``: ``AlpstoreSaver``, a LangGraph checkpointer
  (``pip install 'alpstore[langgraph]'``).
- ``alpstore.integrations.openai_agents``: ``AlpstoreSession``, an OpenAI Agents SDK session
  (``pip install 'alpstore[openai-agents]'``).
"""
