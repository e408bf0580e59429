# Writes meshtest.1 from the binary's own --help and every subcommand's (cmake -P; install.cmake).
function(verbatim text out)  # a block that man shows as written: backslashes and leading dots escaped
  string(REPLACE "\\" "\\e" text "${text}")
  string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" text "${text}")
  set(${out} ".nf\n${text}.fi\n" PARENT_SCOPE)
endfunction()

# The subcommand names a --help text lists under "Subcommands:".
function(subcommands_of help out)
  string(REGEX MATCH "Subcommands:.*" listing "${help}")
  string(REGEX MATCHALL "\n  [a-z-]+" names "${listing}")
  list(TRANSFORM names STRIP)
  set(${out} "${names}" PARENT_SCOPE)
endfunction()

execute_process(COMMAND ${MESHTEST} --help OUTPUT_VARIABLE top)
verbatim("${top}" block)
set(page ".TH MESHTEST 1 \"\" \"meshtest ${VERSION}\" \"User Commands\"\n.SH NAME\nmeshtest \\- a matrix runner for distributed-training CI\n.SH SYNOPSIS\n${block}")
# Every subcommand, and the subcommands of those that have them (golden export, ckpt inspect, ...).
subcommands_of("${top}" names)
foreach(name IN LISTS names)
  execute_process(COMMAND ${MESHTEST} ${name} --help OUTPUT_VARIABLE help)
  verbatim("${help}" block)
  string(APPEND page ".SH \"meshtest ${name}\"\n${block}")
  subcommands_of("${help}" inner_names)
  foreach(inner IN LISTS inner_names)
    execute_process(COMMAND ${MESHTEST} ${name} ${inner} --help OUTPUT_VARIABLE inner_help)
    verbatim("${inner_help}" block)
    string(APPEND page ".SS \"meshtest ${name} ${inner}\"\n${block}")
  endforeach()
endforeach()
string(APPEND page ".SH SEE ALSO\n/usr/share/doc/meshtest/README.md, and in /usr/share/doc/meshtest/docs/: matrix.md, checks.md, foreign-trainers.md, install.md\n")
file(WRITE ${OUT} "${page}")
