"""Rules several layers share: ids and labels, the secret scan, what a user turn is, names.
May import alpstore.db (raw SQL), alpstore.codec, alpstore.errors and the standard library only.
"""
