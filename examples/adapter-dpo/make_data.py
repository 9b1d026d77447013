"""Regenerate this example's spec examples (deterministic; no downloads).

    python examples/adapter-dpo/make_data.py

Customer messages routed to one of five teams (billing, shipping, returns, account, technical), as in
examples/adapter-real, with other products and more rows (100: 20 a team) so that the held-out fifth (the host
holds it out by a hash of the text) has about 20 messages. The derived grader is a `label` grader: an answer
scores 1 only when it is the team's name alone. SFT here is one short epoch: it leaves the model answering the
label on some messages and something else on others; the reference stage samples the SFT model on the training
messages, the grader splits the samples into passing (chosen) and failing (rejected) answers, and DPO trains on
those pairs.
"""

import runpy
from pathlib import Path

HERE = Path(__file__).resolve().parent
PRODUCTS = ["laptop", "mattress", "bicycle", "toaster", "speaker", "watch", "drill", "stroller"]

if __name__ == "__main__":  # examples/adapter-real/make_data.py's phrasings and sampling, this example's products
    runpy.run_path(str(HERE.parent / "adapter-real" / "make_data.py"))["write"](
        HERE / "tunedtensor.json", seed=13, per_team=20, products=PRODUCTS)
