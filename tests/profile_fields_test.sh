#!/usr/bin/env bash
# python/seqkv/profile_fields.py is what the profile table makes of itself
# (`seqkv profile fields --python`): the Python client validates against
# the same table as the server, the C client and the CLI.
# usage: profile_fields_test.sh SEQKV_BIN SOURCE_ROOT
set -euo pipefail
bin=$1 src=$2
if "$bin" profile fields --python | diff -u "$src/python/seqkv/profile_fields.py" -; then
    echo "profile_fields: python/seqkv/profile_fields.py is the table's"
else
    echo "profile_fields: python/seqkv/profile_fields.py is stale: run" \
         "'seqkv profile fields --python > python/seqkv/profile_fields.py'"
    exit 1
fi
