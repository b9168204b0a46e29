"""Reply triage: what an inbound reply is (its class) and what that does.

- `rules`: the deterministic part, pure over the inbound email (headers, report, phrasings).
- `out_of_office`: out-of-office phrasings in several languages, and the return date.
- `intake`: acting on what the rules settle, at intake, with no LLM request.
- `reclassify`: a person changes a reply's class.

What the rules do not settle, the reply's generation job classifies with one model call
(nurture.writing.triage). What each class does is one table (nurture.reply_actions).
"""
