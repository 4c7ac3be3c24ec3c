"""Expectation maximization for a hidden Markov model, after the `examples/hmm_em.py`
program in jax's repository history ("first cut at an HMM EM example", normalized
version).

The E step is the gradient of the log normalizer: the forward algorithm runs as
a `lax.scan` over the observations (indexing the emission matrix with each
traced observation, `B[:, obs]`, with the running normalization of the faster
version), and `grad` of its log-probability with respect to the log-parameters
gives the expected counts. The M step normalizes them; `lax.fori_loop` runs the
EM steps inside one `jit`. `sample` draws a sequence from the fitted model with
keyed `random.categorical` inside a `lax.scan`.

Differences from the original, in data: the text is this file's own source
instead of `jax.core`'s (its first 400 characters in the small run), the initial
log-parameters are numpy draws instead of `random.normal` with jax keys, and
sizes are small. Our keyed random streams differ from jax's, so `run` reports
of the sample only that it is a valid sequence of observation codes. Only the
import block differs from the program run under jax.
"""

# <imports>
from collections import defaultdict
from functools import partial
from itertools import count

import numpy.random as npr

import mlir_autodiff.numpy as np
from mlir_autodiff import grad, jit, lax, random
from mlir_autodiff.scipy.special import logsumexp  # noqa: F401  (imported as in the original)

# </imports>


def log_normalizer(params, seq):
    pi, A, B = map(np.exp, params)

    def marginalize(carry, obs):
        alpha, logprob = carry
        alpha = np.dot(alpha, A) * B[:, obs]
        new_carry = alpha / alpha.sum(), logprob + np.log(alpha.sum())
        return new_carry, None
    (_, logprob), _ = lax.scan(marginalize, (pi, 0.), seq)
    return logprob


@jit
def EM(params, seq, num_steps):
    def update(i, params):
        moments = grad(log_normalizer)(params, seq)                    # E step
        params = [np.log(normalize(x, smooth=1e-2)) for x in moments]  # M step
        return params
    return lax.fori_loop(0, num_steps, update, params)


def normalize(x, smooth):
    x = x + smooth
    return x / x.sum(-1, keepdims=True)


@partial(jit, static_argnums=(2,))
def sample(key, params, length):
    log_pi, log_A, log_B = params

    def sample_one(state, key):
        k1, k2 = random.split(key)
        obs = random.categorical(k1, log_B[state])
        state = random.categorical(k2, log_A[state])
        return state, obs
    k1, k2 = random.split(key)
    init_state = random.categorical(k1, log_pi)
    _, seq = lax.scan(sample_one, init_state, random.split(k2, length))
    return seq


def build_dataset(string):
    encodings = defaultdict(partial(next, count()))
    data = np.array([encodings[c] for c in string])
    decodings = {i: c for c, i in encodings.items()}
    return data, decodings


def run(small=True):
    with open(__file__) as f:
        text = f.read()
    seq, decodings = build_dataset(text[:400] if small else text)

    num_states = 6 if small else 200
    num_obs = len(decodings)

    rng = npr.RandomState(0)
    log_pi = rng.randn(num_states)
    log_A = rng.randn(num_states, num_states)
    log_B = rng.randn(num_states, num_obs)
    params = [log_pi, log_A, log_B]

    num_steps = 5 if small else 50
    new_params = EM(params, seq, num_steps)

    sampled_seq = sample(random.PRNGKey(0), new_params, 20 if small else 200)
    if not small:
        print(''.join(decodings[int(i)] for i in sampled_seq))
    valid = (sampled_seq >= 0) & (sampled_seq < num_obs)
    return {"log_pi": new_params[0], "log_A": new_params[1], "log_B": new_params[2],
            "log_normalizer": log_normalizer(new_params, seq),
            "sample_is_valid": np.all(valid).astype(float)}


if __name__ == "__main__":
    out = run(small=False)
    print("log normalizer after EM", float(out["log_normalizer"]))
