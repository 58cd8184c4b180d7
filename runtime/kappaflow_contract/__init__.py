"""The contract between the kappaflow runtime and the kappaflow operator, written once.

Both sides import this package; each fact lives in one module:

- `properties`: the config file's `.properties` format (Java's `Properties` rules), writer and reader;
- `config`: the config keys the operator sets, `env_key` (key -> `KAPPAFLOW_*` variable) and the
  tooling variables that are not configuration;
- `describe`: the schema of `kappaflow describe --json` and its version;
- `topics`: internal topic names and the partition-count rule.

It is a top-level package, not `kappaflow.contract`: importing a subpackage runs its parent's
`__init__`, and `kappaflow`'s is the whole public facade (the DSL, the stores, rocksdict); the operator
must get the contract without the runtime. It imports nothing but the standard library and pydantic
(an import-linter contract in pyproject keeps it so). See docs/contract.md.
"""
