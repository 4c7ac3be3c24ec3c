"""Differentially private SGD of a conv net, after jax's
`examples/differentially_private_sgd.py`.

The network is `stax.serial(Conv, Relu, MaxPool, Conv, Relu, MaxPool, Flatten,
Dense, Relu, Dense)`; DP-SGD (Abadi et al., 2016) takes per-example gradients by
`vmap` of `grad` over single-example batches, clips each to an L2 norm of
`l2_norm_clip` (`tree_flatten` and `jnp.linalg.norm` of the per-leaf norms),
sums them, adds Gaussian noise of scale `l2_norm_clip * noise_multiplier`, and
takes an `optimizers.sgd` step, all in one `jit` (`update` is the non-private
step, for `dpsgd = False`).

Differences from the original (the lines marked `# port:`):
- the data set is scikit-learn's bundled 8x8 digits instead of MNIST (no
  download), so the images are 8x8 and the two convolutions are 4x4 with
  stride 2 (SAME) and 2x2 with stride 1 (VALID) instead of 8x8 and 4x4 (the
  28x28 sizes would leave nothing after the second);
- the initial parameters and the Gaussian noise are numpy draws (our keyed
  random streams differ from jax's): `init_random_params` still gives the
  shapes, and `private_grad` takes its noise as an argument in place of
  `rng` (`random.split` / `random.normal`), one numpy draw per step;
- the absl flags are `run`'s constants, and the privacy accounting
  (`compute_epsilon`, which needs the `dp-accounting` package) is left out.
"""

# <imports>
import itertools

import numpy.random as npr
from sklearn.datasets import load_digits

import mlir_autodiff.numpy as jnp
from mlir_autodiff import grad, jit, random, vmap
from mlir_autodiff.example_libraries import optimizers, stax
from mlir_autodiff.tree_util import tree_flatten, tree_unflatten

# </imports>


init_random_params, predict = stax.serial(
    stax.Conv(16, (4, 4), padding='SAME', strides=(2, 2)),  # port: 8x8 images
    stax.Relu,
    stax.MaxPool((2, 2), (1, 1)),
    stax.Conv(32, (2, 2), padding='VALID', strides=(1, 1)),  # port: 8x8 images
    stax.Relu,
    stax.MaxPool((2, 2), (1, 1)),
    stax.Flatten,
    stax.Dense(32),
    stax.Relu,
    stax.Dense(10),
)


def loss(params, batch):
    inputs, targets = batch
    logits = predict(params, inputs)
    logits = stax.logsoftmax(logits)  # log normalize
    return -jnp.mean(jnp.sum(logits * targets, axis=1))  # cross entropy loss


def accuracy(params, batch):
    inputs, targets = batch
    target_class = jnp.argmax(targets, axis=1)
    predicted_class = jnp.argmax(predict(params, inputs), axis=1)
    return jnp.mean(predicted_class == target_class)


def clipped_grad(params, l2_norm_clip, single_example_batch):
    """Evaluate gradient for a single-example batch and clip its grad norm."""
    grads = grad(loss)(params, single_example_batch)
    nonempty_grads, tree_def = tree_flatten(grads)
    total_grad_norm = jnp.linalg.norm(
        jnp.array([jnp.linalg.norm(neg.ravel()) for neg in nonempty_grads]))
    divisor = jnp.maximum(total_grad_norm / l2_norm_clip, 1.)
    normalized_nonempty_grads = [g / divisor for g in nonempty_grads]
    return tree_unflatten(tree_def, normalized_nonempty_grads)


def private_grad(params, batch, noise, l2_norm_clip, noise_multiplier,  # port: noise, not rng
                 batch_size):
    """Return differentially private gradients for params, evaluated on batch."""
    clipped_grads = vmap(clipped_grad, (None, None, 0))(params, l2_norm_clip, batch)
    clipped_grads_flat, grads_treedef = tree_flatten(clipped_grads)
    aggregated_clipped_grads = [g.sum(0) for g in clipped_grads_flat]
    noised_aggregated_clipped_grads = [
        g + l2_norm_clip * noise_multiplier * n  # port: numpy noise for random.normal(r, g.shape)
        for n, g in zip(noise, aggregated_clipped_grads)]
    normalized_noised_aggregated_clipped_grads = [
        g / batch_size for g in noised_aggregated_clipped_grads]
    return tree_unflatten(grads_treedef, normalized_noised_aggregated_clipped_grads)


def shape_as_image(images, labels, dummy_dim=False):
    target_shape = (-1, 1, 8, 8, 1) if dummy_dim else (-1, 8, 8, 1)  # port: 8x8 images
    return jnp.reshape(images, target_shape), labels


def load(n_train, n_test):  # port: the bundled digits instead of datasets.mnist()
    digits = load_digits()
    images = digits.data / 16.0
    labels = (digits.target[:, None] == jnp.arange(10)).astype(float)
    test = slice(n_train, n_train + n_test)
    return images[:n_train], labels[:n_train], images[test], labels[test]


def run(small=True):
    dpsgd = True
    learning_rate = .15
    noise_multiplier = 1.1
    l2_norm_clip = 1.0
    batch_size = 16 if small else 256
    epochs = 1 if small else 60
    seed = 0

    n_train, n_test = (48, 64) if small else (1500, 297)
    train_images, train_labels, test_images, test_labels = load(n_train, n_test)
    num_train = train_images.shape[0]
    num_complete_batches, leftover = divmod(num_train, batch_size)
    num_batches = num_complete_batches + bool(leftover)
    key = random.key(seed)
    rng = npr.RandomState(seed)  # port: numpy draws for the initial parameters and noise

    def data_stream():
        rng = npr.RandomState(seed)
        while True:
            perm = rng.permutation(num_train)
            for i in range(num_batches):
                batch_idx = perm[i * batch_size:(i + 1) * batch_size]
                yield train_images[batch_idx], train_labels[batch_idx]

    batches = data_stream()

    opt_init, opt_update, get_params = optimizers.sgd(learning_rate)

    @jit
    def update(_, i, opt_state, batch):
        params = get_params(opt_state)
        return opt_update(i, grad(loss)(params, batch), opt_state)

    @jit
    def private_update(noise, i, opt_state, batch):  # port: noise, not rng
        params = get_params(opt_state)
        return opt_update(
            i,
            private_grad(params, batch, noise, l2_norm_clip,
                         noise_multiplier, batch_size), opt_state)

    # port: 8x8 images; jitted (jax's eager initializers compile op by op: 10 s)
    _, init_params = jit(init_random_params, static_argnums=1)(key, (-1, 8, 8, 1))
    init_params = [tuple(0.1 * rng.randn(*w.shape) for w in layer)  # port: numpy draws
                   for layer in init_params]
    opt_state = opt_init(init_params)
    itercount = itertools.count()

    out = {}
    for epoch in range(1, epochs + 1):
        for _ in range(num_batches):
            if dpsgd:
                leaves = tree_flatten(get_params(opt_state))[0]
                noise = [rng.randn(*w.shape) for w in leaves]  # port: numpy noise
                opt_state = \
                    private_update(
                        noise, next(itercount), opt_state,
                        shape_as_image(*next(batches), dummy_dim=True))
            else:
                opt_state = update(
                    key, next(itercount), opt_state, shape_as_image(*next(batches)))

        params = get_params(opt_state)
        test_acc = accuracy(params, shape_as_image(test_images, test_labels))
        test_loss = loss(params, shape_as_image(test_images, test_labels))
        print(f'Epoch {epoch}: test set loss, accuracy (%): ({test_loss:.2f}, '
              f'{100 * test_acc:.2f})')
    out["private_test_loss"] = test_loss
    out["private_test_accuracy"] = test_acc
    out["private_params"] = params[-1][0]
    out["private_first_kernel"] = params[0][0]

    return out


if __name__ == "__main__":
    run(small=False)
