"""What a store is made of: the core class features are given and typed against (reads, writes).
May import alpstore.sessions, archive, views, policy, rules, db and below; never a feature.
"""
