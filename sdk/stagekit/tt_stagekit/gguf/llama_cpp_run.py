"""Run a GGUF file in llama.cpp (llama-cpp-python) and print what it does, as one JSON line (tests, bench).

    PYTHON -P llama_cpp_run.py REQUEST.json     # PYTHON: the cached llama.cpp environment (llama_cpp_env)

Runs by file path in an environment that has llama-cpp-python and nothing of tt, so it imports only the
standard library, numpy and llama_cpp. REQUEST: {"gguf": path, "texts": [...], "prompts": [[ids], ...],
"rendered": [text, ...], "max_new_tokens": n, "stop": [ids]}. It prints {"plain": [[ids]...] (texts with
special-token text as plain text), "parsed": [[ids]...] (special tokens recognised), "rendered": [[ids]...]
(the rendered prompts, specials recognised), "greedy": [[ids]...] (argmax of llama.cpp's logits after each
prompt, until a stop id or max_new_tokens)}.
"""

import json
import sys


def main(path: str) -> int:
    import numpy as np
    from llama_cpp import Llama

    request = json.loads(open(path, encoding="utf-8").read())
    llm = Llama(model_path=request["gguf"], n_ctx=int(request.get("n_ctx", 512)), n_threads=2, n_batch=512,
                verbose=False, seed=0, logits_all=True)  # scores filled for the argmax below

    def tokenize(text: str, special: bool) -> list:
        return [int(t) for t in llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)]

    stop = set(request.get("stop") or [])
    greedy = []
    for prompt in request.get("prompts") or []:
        llm.reset()
        llm.eval(list(prompt))
        answer = []
        for _ in range(int(request.get("max_new_tokens", 16))):
            token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            answer.append(token)
            if token in stop:
                break
            llm.eval([token])
        greedy.append(answer)
    out = {"plain": [tokenize(t, False) for t in request.get("texts") or []],
           "parsed": [tokenize(t, True) for t in request.get("texts") or []],
           "rendered": [tokenize(t, True) for t in request.get("rendered") or []], "greedy": greedy}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
