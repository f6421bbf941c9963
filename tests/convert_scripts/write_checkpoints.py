"""Write TF checkpoints with the real TensorFlow for tests/test_convert_checkpoint.py (run in a subprocess).

Usage: python write_checkpoints.py OUTDIR.  Writes under OUTDIR:
  v1/model      tf.compat.v1.train.Saver: float/int/bool/string, scalar, empty, a large tensor, a
                partitioned variable, contrib-style TF cell variables and an opaque_kernel
  v1s/model     a sharded Saver over 3 logical CPU devices (3 .data shards)
  v2/ckpt       tf.train.Checkpoint: every dtype, a Keras LSTM + Bidirectional(GRU) model
  v2s/ckpt      the same with MaxShardSizePolicy(64 bytes): many shards, tensors split into slices
  expected.pkl  {checkpoint: {name: value}} and the Keras model's input/outputs
"""

import os
import pickle
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

out = sys.argv[1]
for sub in ("v1", "v1s", "v2", "v2s"):
    os.makedirs(os.path.join(out, sub), exist_ok=True)
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 3)
rng = np.random.default_rng(0)
expected = {}

cells = pickle.loads(bytes.fromhex(sys.argv[2])) if len(sys.argv) > 2 else {}
v1_values = {"f32": rng.standard_normal((2, 3)).astype(np.float32),
             "dir/f64": rng.standard_normal(4),
             "i32": np.arange(-3, 3, dtype=np.int32).reshape(3, 2),
             "i64": np.array([2 ** 40, -1], np.int64),
             "flag": np.array([True, False, True]),
             "scalar": np.float32(-0.25),
             "empty": np.zeros((0, 3), np.float32),
             "text": np.array([b"ab", b"", b"\x00\xff" * 3], dtype=object),
             "big": rng.standard_normal((64, 65)).astype(np.float32),
             **cells}
with tf.Graph().as_default():
    for name, value in v1_values.items():
        tf.compat.v1.get_variable(name, initializer=value if value.dtype != object else value.astype(bytes))
    part = tf.compat.v1.get_variable("part", shape=(7, 2), initializer=tf.compat.v1.random_normal_initializer(seed=1),
                                     partitioner=tf.compat.v1.fixed_size_partitioner(3))  # saved as 3 slices
    part_value = part.as_tensor()
    saver = tf.compat.v1.train.Saver()
    with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        partitioned = session.run(part_value)
        saver.save(session, os.path.join(out, "v1", "model"), write_meta_graph=False)
expected["v1/model"] = {**v1_values, "part": partitioned}

with tf.Graph().as_default():
    shard_values = {}
    for d in range(3):
        with tf.device(f"/cpu:{d}"):
            shard_values[f"s{d}"] = np.full((d + 1, 2), d, np.float32) + rng.standard_normal((d + 1, 2)).astype(np.float32)
            tf.compat.v1.get_variable(f"s{d}", initializer=shard_values[f"s{d}"])
    saver = tf.compat.v1.train.Saver(sharded=True)
    with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        saver.save(session, os.path.join(out, "v1s", "model"), write_meta_graph=False)
expected["v1s/model"] = shard_values

import keras  # noqa: E402

model = keras.Sequential([keras.Input((None, 3)), keras.layers.LSTM(4, return_sequences=True),
                          keras.layers.Bidirectional(keras.layers.GRU(5, return_sequences=True))])
dtypes = {"bf16": tf.bfloat16, "f16": tf.float16, "i8": tf.int8, "i16": tf.int16, "u8": tf.uint8, "u16": tf.uint16,
          "c64": tf.complex64, "u32": tf.uint32, "u64": tf.uint64}
variables = {k: tf.Variable(tf.cast(tf.constant(rng.uniform(0, 100, (2, 3))), dt)) for k, dt in dtypes.items()}
variables["half_scalar"] = tf.Variable(tf.constant(1.5, tf.float16))
checkpoint = tf.train.Checkpoint(model=model, **variables)
checkpoint.write(os.path.join(out, "v2", "ckpt"))
policy = tf.train.experimental.MaxShardSizePolicy(max_shard_size=64)  # splits tensors into slices
checkpoint.write(os.path.join(out, "v2s", "ckpt"), options=tf.train.CheckpointOptions(experimental_sharding_callback=policy))
v2_values = {}
for k, v in variables.items():
    value = v.numpy()
    v2_values[f"{k}/.ATTRIBUTES/VARIABLE_VALUE"] = value.astype(np.float32) if v.dtype == tf.bfloat16 else value
x = rng.standard_normal((2, 6, 3)).astype(np.float32)
expected["v2/ckpt"] = expected["v2s/ckpt"] = v2_values
expected["keras"] = {"x": x, "lstm": model.layers[0](x).numpy(), "model": model(x).numpy()}
with open(os.path.join(out, "expected.pkl"), "wb") as handle:
    pickle.dump(expected, handle)
