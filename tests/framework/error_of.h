#pragma once
// error_of<E>(fn): runs fn, expects it to throw E, and returns the message
// (records a test failure and returns "" when nothing is thrown).
#include <gtest/gtest.h>

#include <string>

namespace plexus::test {

template <typename E, typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

}  // namespace plexus::test
