"""Run the demo: every process of the product on the embedded defaults, live progress in the
terminal, inbound replies arriving, and (with --for) a report. Ctrl-C stops everything."""

from __future__ import annotations

import json
import random
import socket
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import User
from django.utils import timezone
from rich.console import Console
from rich.live import Live

from demo.live import Sample, render, take_sample
from demo.report import write_report
from demo.seed import seed_demo
from devtools.processes import ProcessGroup, flower, stack_env, start_pipeline, web
from nurture.intake.replies import signature_header
from nurture.review import drafts_approve
from outreach.models import Outreach, State


@dataclass(frozen=True)
class DemoOptions:
    seconds: float | None
    leads: int
    web_port: int = 8000
    flower_port: int = 5555
    sim_port: int = 8900
    smtp_port: int = 1025
    rpm: int = 300
    tpm: int = 300_000
    reply_every_s: float = 6.0
    # One answer per burst, short enough to watch (docs/dispatch.md, "The quiet period"):
    # production's 60 s would leave the demo's replies unanswered for a minute.
    reply_quiet_s: int = 3
    auto_approve_after_s: float = 30.0
    report_dir: Path = Path("var/demo-report")


def port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def child_env(opts: DemoOptions) -> dict[str, str]:
    return stack_env(
        llm_base_url=f"http://127.0.0.1:{opts.sim_port}/v1",
        smtp_port=opts.smtp_port,
        LLM_RPM=str(opts.rpm),
        LLM_TPM=str(opts.tpm),
        PUBLIC_BASE_URL=f"http://127.0.0.1:{opts.web_port}",
        REPLY_QUIET_S=str(opts.reply_quiet_s),
    )


def start_all(group: ProcessGroup, opts: DemoOptions) -> None:
    py = sys.executable
    group.start(
        "llm_sim",
        [
            py,
            "manage.py",
            "llm_sim",
            "--port",
            str(opts.sim_port),
            "--rpm",
            str(opts.rpm),
            "--tpm",
            str(opts.tpm),
            "--latency-ms",
            "600",
        ],
    )
    group.start(
        "smtp",
        [py, "-m", "devtools.smtp_sink", "--port", str(opts.smtp_port)],
    )
    group.start("web", web(port=opts.web_port))
    start_pipeline(group)  # the production recipe (config.workers)
    group.start("flower", flower(port=opts.flower_port))


def post_reply(*, opts: DemoOptions, rng: random.Random) -> int | None:
    """An inbound reply from a lead we emailed, through the signed webhook, as a provider would."""
    sent = Outreach.objects.filter(state=State.SENT).order_by("?").select_related("lead").first()
    if sent is None:
        return None
    body = json.dumps(
        {
            "lead_email": sent.lead.email,
            "message_id": f"<demo-reply-{rng.getrandbits(48):x}@prospect.example>",
            "subject": f"Re: {sent.draft_subject}",
            "body": "Sounds interesting. Can we talk next week?",
        }
    )
    signature = signature_header(
        body=body.encode(), secret=settings.WEBHOOK_SECRET, timestamp=int(time.time())
    )
    request = urllib.request.Request(
        f"http://127.0.0.1:{opts.web_port}/hooks/replies/",
        data=body.encode(),
        method="POST",
        headers={"Content-Type": "application/json", "X-Signature": signature},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def auto_approve(*, older_than_s: float) -> int:
    """Stand in for a reviewer so the approved-send path shows; humans can approve in admin too."""
    reviewer = User.objects.get(username="reviewer")
    cutoff = timezone.now() - timedelta(seconds=older_than_s)
    waiting = Outreach.objects.filter(state=State.AWAITING_APPROVAL, state_changed_at__lt=cutoff)[:20]
    return drafts_approve(drafts=waiting, by=reviewer)


def wait_for_web(port: int, *, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/admin/login/", timeout=1)
            return
        except OSError:
            time.sleep(0.3)


def run(*, opts: DemoOptions, console: Console) -> dict[str, object] | None:
    busy = [p for p in (opts.web_port, opts.flower_port, opts.sim_port, opts.smtp_port) if not port_free(p)]
    if busy:
        raise RuntimeError(
            f"port(s) {', '.join(map(str, busy))} already in use: stop what holds them or pick other ports."
        )
    seed_demo(leads=opts.leads)
    group = ProcessGroup(log_dir=Path(settings.BASE_DIR) / "var" / "logs", env=child_env(opts))
    samples: list[Sample] = []
    started_at = timezone.now()  # the report's figures cover the run from here
    try:
        start_all(group, opts)
        wait_for_web(opts.web_port)
        console.print(
            f"[bold green]Demo running.[/] admin http://127.0.0.1:{opts.web_port}/admin/ (admin / admin; reviewer / reviewer), "
            f"flower http://127.0.0.1:{opts.flower_port}/ ({settings.FLOWER_BASIC_AUTH.replace(':', ' / ')}), "
            f"logs {group.log_dir}. Ctrl-C stops everything."
        )
        samples = _loop(group=group, opts=opts, console=console)
    finally:
        console.print("Stopping every process the demo started...")
        group.stop()
    if opts.seconds is None:
        return None
    return write_report(
        out=Path(settings.BASE_DIR) / opts.report_dir,
        samples=samples,
        rpm_limit=opts.rpm,
        started_at=started_at,
    )


def _loop(*, group: ProcessGroup, opts: DemoOptions, console: Console) -> list[Sample]:
    started, rng, samples = time.monotonic(), random.Random(11), []
    next_reply = started + opts.reply_every_s
    deadline = None if opts.seconds is None else started + opts.seconds
    try:
        with Live(console=console, refresh_per_second=2) as live:
            while deadline is None or time.monotonic() < deadline:
                if dead := group.dead():
                    raise RuntimeError(f"{', '.join(dead)} exited early; see {group.log_dir}")
                sample = take_sample(started=started, sim_port=opts.sim_port)
                samples.append(sample)
                live.update(render(sample, rpm_limit=opts.rpm))
                if time.monotonic() >= next_reply:
                    post_reply(opts=opts, rng=rng)
                    next_reply += opts.reply_every_s
                if opts.auto_approve_after_s > 0:
                    auto_approve(older_than_s=opts.auto_approve_after_s)
                time.sleep(1)
    except KeyboardInterrupt:
        pass
    return samples
