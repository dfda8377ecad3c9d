"""typesafe-sdk 0.7.5, unchanged, against ruling-serve: only the base URL differs.

    python3 test_sdk.py BASE_URL KEY [BUSY_URL]

BASE_URL serves a real (tiny) model with KEY required. BUSY_URL, when given, serves an engine
that holds its first request until the driver (tests/sdk.rs) sees a request refused with 429,
with one worker and no queue, so the SDK's retry of a 429 can be shown without timing luck.
Plain asserts, no pytest; exits non-zero on the first failure.
"""

import logging
import re
import sys
import threading
import time
import urllib.request

import typesafe_sdk
from typesafe_sdk import (
    Choice,
    Noul,
    RetryPolicy,
    Score,
    TypeSafeAuthenticationError,
    TypeSafeClient,
    TypeSafeUnprocessableEntityError,
)

BASE_URL, KEY = sys.argv[1], sys.argv[2]
BUSY_URL = sys.argv[3] if len(sys.argv) > 3 else None

TICKET = "Hi, my card was charged twice for the March invoice. Please refund one. "
QUESTIONS = {
    "billing": Noul(instructions="Is this ticket about billing?"),
    "team": Choice(
        instructions="Which team should handle it?",
        criteria={"billing": "refunds and invoices", "tech": "bugs and log-in", "other": None},
    ),
    "urgency": Score(instructions="How urgent is it?", criteria=["can wait", "this week", "today"]),
}


def check(condition, message):
    if not condition:
        raise AssertionError(message)


class Retries(logging.Handler):
    """Counts the SDK's own "retry N" log lines."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record):
        if " retry " in record.getMessage():
            self.count += 1


def answers_three_types_in_one_request():
    with TypeSafeClient(base_url=BASE_URL, api_key=KEY) as client:
        # Over 1 KiB, so the SDK sends it zstd-compressed when zstd is available.
        result = client.system_one(state=TICKET * 20, questions=QUESTIONS)
        check(0.0 <= result.nouls["billing"].noul <= 1.0, result)
        check(result.choices["team"].choice in {"billing", "tech", "other"}, result)
        check(abs(sum(result.choices["team"].probabilities.values()) - 1.0) < 1e-6, result)
        check(0.0 <= result.scores["urgency"].score <= 2.0, result)
        check(result.usage.input_tokens > 0, result)
        check(bool(result.request_id), "the SDK reads the request id")
        sent = result.raw_http_response.request.headers.get("content-encoding")
        check(sent == "zstd", f"the SDK sent the body zstd-compressed (content-encoding {sent!r})")
        # The SDK's default model is jev-latest, a default alias: the served name comes back.
        check(result.model != "", result)
    print("ok: noul, choice and score in one request; request id", result.request_id)


def lists_models():
    with TypeSafeClient(base_url=BASE_URL, api_key=KEY) as client:
        models = client.models.list().models
        names = [m.name for m in models]
        check("jev-latest" in names, names)
        for model in models:
            check(re.fullmatch(r"\d{4}-\d{2}-\d{2}", model.release_date), model)
            check(model.description, model)
    print("ok: models", names)


def a_422_names_the_field():
    with TypeSafeClient(base_url=BASE_URL, api_key=KEY) as client:
        try:
            client.system_one(
                state="s",
                questions={"pick": Choice(instructions="Pick one", criteria={"only": None})},
            )
        except TypeSafeUnprocessableEntityError as error:
            check(error.status == 422, error)
            text = str(error)
            check("questions.pick.choice.criteria" in text, text)
            check("a choice needs at least two options" in text, text)
            check(error.request_id, "a request id on errors too")
            print("ok: 422 ->", text)
            return
    raise AssertionError("a one-option choice was accepted")


def a_wrong_key_is_an_authentication_error():
    with TypeSafeClient(base_url=BASE_URL, api_key="not-the-key") as client:
        try:
            client.models.list()
        except TypeSafeAuthenticationError as error:
            check(error.status == 401, error)
            print("ok: 401 ->", error)
            return
    raise AssertionError("a wrong key was accepted")


def a_429_is_retried():
    retries = Retries()
    logging.getLogger("typesafe_sdk").addHandler(retries)
    logging.getLogger("typesafe_sdk").setLevel(logging.INFO)
    results = {}

    def first():
        with TypeSafeClient(base_url=BUSY_URL, api_key=KEY, retry=RetryPolicy(max_retries=0)) as client:
            results["first"] = client.system_one(state="first", questions=QUESTIONS, timeout=60)

    holder = threading.Thread(target=first)
    holder.start()
    # Wait until the engine holds the first request, so the second finds no room.
    request = urllib.request.Request(f"{BUSY_URL}/metrics", headers={"Authorization": f"Bearer {KEY}"})
    for _ in range(600):
        text = urllib.request.urlopen(request).read().decode()
        if re.search(r"^ruling_busy_workers 1$", text, re.M):
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the first request never reached the engine")

    with TypeSafeClient(base_url=BUSY_URL, api_key=KEY, retry=RetryPolicy(max_retries=5, timeout=60)) as client:
        second = client.system_one(state="second", questions=QUESTIONS, timeout=60)
    holder.join(60)
    check("first" in results, "the held request was answered")
    check(second.nouls["billing"].noul == 0.5, second)
    check(retries.count >= 1, f"the SDK retried after 429 ({retries.count} retries)")
    print(f"ok: 429 retried by the SDK ({retries.count} retries), then answered")


print("typesafe-sdk", typesafe_sdk.__version__)
answers_three_types_in_one_request()
lists_models()
a_422_names_the_field()
a_wrong_key_is_an_authentication_error()
if BUSY_URL:
    a_429_is_retried()
print("all SDK checks passed")
