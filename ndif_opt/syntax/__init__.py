"""Reading and writing code: libcst parses, code generation, positions, walks, tree edits."""
