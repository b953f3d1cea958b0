// A shared library that is not libcuda: it has cuInit and nothing else.
extern "C" int cuInit(unsigned) { return 0; }
