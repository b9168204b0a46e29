"""How work enters the queue.

- csv_file: reading and validating an assignment CSV (pure)
- assignment: the assignment batch (parent) and its per-lead children, bulk loading in chunks
- cadence: when nudges fall due, in business days in the lead's time zone (pure)
- sequence: stopping a sequence (reply, conversion) and opting a lead out
- replies: the inbound-reply webhook's signature, payload and service
"""
