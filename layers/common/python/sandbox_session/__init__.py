"""The session runtime: stdlib-only code shipped into sandbox sessions (which cannot import our
packages) and executed there from its source text: the stdio redactor (`redactor`), programmatic
tool calling (`tools`) and the background-job supervisor (`jobs`). Nothing here imports anything
but the standard library."""
