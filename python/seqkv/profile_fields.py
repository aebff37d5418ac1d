"""The profile fields: the names KV.PROFILE SET and GET use, each one's
kind (how GET returns it), flags and what it may be. Made by `seqkv
profile fields --python` from the one table in base/profile_fields.c; do
not edit (tests/profile_fields_test.sh checks it)."""

FIELDS = (
    ("name", "text", "shape", "a name of 1..63 bytes"),
    ("layers", "int", "shape", "1..65536"),
    ("kv_heads", "int", "shape", "1..65536"),
    ("head_dim", "int", "shape", "1..65536"),
    ("dtype", "text", "shape", "bf16, fp16, fp8 or fp32"),
    ("level", "text", "change", "raw, stat, ctx, spec, full or fast"),
    ("rope_theta", "float", "shape", "a number in [0, 1e12] (0: the model's, else 10000)"),
    ("rope_dim", "int", "shape", "0..65536 rotated channels a head (0: head_dim)"),
    ("rope_half", "int", "shape", "1 (HF's half layout) or 0 (pairs)"),
    ("chunk", "int", "shape", "1..4096 tokens a chunk (default 256)"),
    ("vocab", "int", "change", "token ids in [0, vocab): 1..2147483647 (default: the model's, else 1048576)"),
    ("model", "text", "change,admin", "a checkpoint's path (\"\": none)"),
    ("calibrated", "int", "store", "1 once calibrated"),
    ("auto_calibrate", "int", "change", "token positions before it calibrates itself (0: never; default 8192)"),
    ("lossy", "int", "change", "q4, q3, q2 or off (4, 3, 2, 0)"),
    ("lossy_sink", "int", "change", "first positions of a sequence kept exact (0: none; default 4)"),
    ("lossy_recent", "int", "change", "last positions of a put kept exact (0: none; default 64)"),
    ("lossy_calibrated", "int", "store", "1 once its lossy tier is calibrated"),
    ("token_bytes", "int", "store", "bytes of one token's KV"),
    ("id", "text", "store", "the identity hash, hex"),
)
