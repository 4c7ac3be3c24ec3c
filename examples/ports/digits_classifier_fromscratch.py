"""An MLP classifier trained with plain SGD, written from scratch, after jax's
`examples/mnist_classifier_fromscratch.py`.

Parameters are a list of (weights, bias) pairs; the log-softmax uses
`scipy.special.logsumexp`; the update is a jitted SGD step over the whole
parameter list; accuracy is reported on the training and test splits. The
data set is scikit-learn's bundled 8x8 digits instead of MNIST (no download),
and the random initialization and the minibatch order come from numpy, as in
the original. Only the import block differs from the program run under jax.
"""

# <imports>
import numpy.random as npr
from sklearn.datasets import load_digits

import mlir_autodiff.numpy as jnp
from mlir_autodiff import grad, jit
from mlir_autodiff.scipy.special import logsumexp

# </imports>


def init_random_params(scale, layer_sizes, rng=npr.RandomState(0)):
    return [(scale * rng.randn(m, n), scale * rng.randn(n))
            for m, n in zip(layer_sizes[:-1], layer_sizes[1:])]


def predict(params, inputs):
    activations = inputs
    for w, b in params[:-1]:
        outputs = jnp.dot(activations, w) + b
        activations = jnp.tanh(outputs)
    final_w, final_b = params[-1]
    logits = jnp.dot(activations, final_w) + final_b
    return logits - logsumexp(logits, axis=1, keepdims=True)


def loss(params, batch):
    inputs, targets = batch
    preds = predict(params, inputs)
    return -jnp.mean(jnp.sum(preds * targets, axis=1))


def accuracy(params, batch):
    inputs, targets = batch
    target_class = jnp.argmax(targets, axis=1)
    predicted_class = jnp.argmax(predict(params, inputs), axis=1)
    return jnp.mean(predicted_class == target_class)


def load(n_train):
    digits = load_digits()
    images = digits.data / 16.0
    labels = (digits.target[:, None] == jnp.arange(10)).astype(float)
    return (images[:n_train], labels[:n_train]), (images[n_train:], labels[n_train:])


def run(small=True):
    layer_sizes = [64, 32, 10] if small else [64, 256, 256, 10]
    param_scale = 0.1
    step_size = 0.1
    num_epochs = 1 if small else 30
    batch_size = 32
    (train_images, train_labels), test = load(320 if small else 1500)
    num_train = train_images.shape[0]
    num_complete_batches, leftover = divmod(num_train, batch_size)
    num_batches = num_complete_batches + bool(leftover)

    def data_stream():
        rng = npr.RandomState(0)
        while True:
            perm = rng.permutation(num_train)
            for i in range(num_batches):
                batch_idx = perm[i * batch_size:(i + 1) * batch_size]
                yield train_images[batch_idx], train_labels[batch_idx]

    batches = data_stream()

    @jit
    def update(params, batch):
        grads = grad(loss)(params, batch)
        return [(w - step_size * dw, b - step_size * db)
                for (w, b), (dw, db) in zip(params, grads)]

    params = init_random_params(param_scale, layer_sizes)
    losses = []
    for _ in range(num_epochs):
        for _ in range(num_batches):
            batch = next(batches)
            params = update(params, batch)
            losses.append(loss(params, batch))
    return {"losses": jnp.stack(losses),
            "train_accuracy": accuracy(params, (train_images, train_labels)),
            "test_accuracy": accuracy(params, test),
            "w_last": params[-1][0]}


if __name__ == "__main__":
    out = run(small=False)
    print(f"final loss {float(out['losses'][-1]):.4f}, train accuracy "
          f"{float(out['train_accuracy']):.3f}, test accuracy {float(out['test_accuracy']):.3f}")
