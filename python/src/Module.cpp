//===- Module.cpp - The attnc._attnc extension module ---------------------===//
//
// Registers attnc.Error and what each file binds (see Bindings.h). The
// Python layer (attnc/__init__.py) allocates outputs, dispatches on the
// query's device and binds captures by name.
//
//===----------------------------------------------------------------------===//
#include "Bindings.h"

namespace nb = nanobind;

NB_MODULE(_attnc, m) {
  namespace py = attnc::python;
  m.doc() = "attnc: the attention-variant compiler and its runtime";
  nb::exception<py::Error>(m, "Error", PyExc_ValueError);
  py::bindRuntime(m);
  py::bindCuda(m);
  py::bindBackward(m);
#ifdef ATTNC_PYTHON_COMPILER
  py::bindCompiler(m);
  m.attr("has_compiler") = true;
#else
  m.attr("has_compiler") = false;
#endif
}
