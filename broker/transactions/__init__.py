"""Transactions (exactly-once): the transaction coordinator, its `__transaction_state` log, and the
markers it writes to the partitions of each transaction."""
