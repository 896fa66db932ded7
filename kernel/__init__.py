"""The shared vocabulary every layer speaks: types, errors, token counting, the message catalogue, text
hygiene and logging. It imports nothing from bot/, memory/ or surfaces/ (an import contract in .ci/run)."""
