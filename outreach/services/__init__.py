"""Writes on the records, one module per entity: owners, the queue, operators' actions."""
