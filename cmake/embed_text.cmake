# embed_text.cmake: writes a C++ source file that holds a text file as a raw string literal, so
# that a page is compiled into the executable (no file to find at run time). Run as a build step:
#   cmake -DIN=file -DOUT=file.cpp -DNAMESPACE=ns -DFUNCTION=name -P embed_text.cmake
# OUT defines `std::string_view NAMESPACE::FUNCTION()`, which returns the file's bytes.
foreach(arg IN ITEMS IN OUT NAMESPACE FUNCTION)
  if(NOT DEFINED ${arg})
    message(FATAL_ERROR "embed_text.cmake: -D${arg}=... is required")
  endif()
endforeach()
file(READ "${IN}" text)
# The literal's delimiter must not occur in the text followed by '"' (it would end the literal).
set(delimiter "factum_embed")
string(FIND "${text}" ")${delimiter}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "embed_text.cmake: ${IN} contains ')${delimiter}\"'; change the delimiter")
endif()
get_filename_component(name "${IN}" NAME)
file(WRITE "${OUT}"
  "// Generated from ${name} by cmake/embed_text.cmake at build time: edit ${name}, not this.\n"
  "#include <string_view>\n\n"
  "namespace ${NAMESPACE} {\n\n"
  "std::string_view ${FUNCTION}() {\n"
  "  static constexpr std::string_view text = R\"${delimiter}(${text})${delimiter}\";\n"
  "  return text;\n"
  "}\n\n"
  "} // namespace ${NAMESPACE}\n")
