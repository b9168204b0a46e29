from __future__ import annotations

from django.apps import AppConfig


class NurtureConfig(AppConfig):
    name = "nurture"

    def ready(self) -> None:
        # The email providers' webhooks (django-anymail, mounted in config/urls.py) deliver
        # through anymail's signals: their receivers are connected here, in one place.
        from anymail.signals import inbound, tracking

        from nurture.intake.inbound_email import inbound_email_received
        from nurture.mail.events import tracking_received

        inbound.connect(inbound_email_received, dispatch_uid="nurture.inbound_email_received")
        # Bounces and complaints from a provider's tracking webhook (docs/email.md).
        tracking.connect(tracking_received, dispatch_uid="nurture.mail.events.tracking_received")
