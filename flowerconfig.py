"""Flower's configuration file (Flower reads ./flowerconfig.py at start).

Basic auth comes from the product's own setting, FLOWER_BASIC_AUTH (required outside debug,
`admin:admin` in the demo), so the password is never on a command line (`ps` shows those to
every user of the machine) and Flower never starts open.
"""

from django.conf import settings

basic_auth = [settings.FLOWER_BASIC_AUTH]
